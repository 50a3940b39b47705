"""Bisection over tokamax releases at a fixed jax (`--library tokamax --jax X`): the walk's
environments and folders are the (jax, tokamax) pair's, a release the table forbids at that jax is
skipped without an install, and the command line finds the boundary with fakes (no network)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from reports.__main__ import main
from reports.bisection import installs
from reports.bisection.installs import NoxInstaller, SuiteRunner, Walk, env_name
from reports.bisection.search import BisectError, Install, Observation, bisect
from reports.ledger.range_edit import entry_range

ROOT = Path(__file__).resolve().parents[3]
CASE = "tokamax[impl=xla]-float32-full-B1-Hq1-Hkv1-Sq128-Sk128-D64"
TOKAMAX = ("0.0.9", "0.0.10", "0.0.11", "0.0.12")


def test_a_tokamax_walk_names_the_pairs_session_environment_and_folder():
    walk = Walk("tokamax", "0.10.2")
    assert walk.pair("0.0.11") == ("0.10.2", "0.0.11")
    assert walk.session("0.0.11") == "conformance(jax='0.10.2', tokamax='0.0.11')"
    # nox's own folder name for that session (its _normalize_path: non-word characters to '-')
    assert env_name(*walk.pair("0.0.11")) == "conformance-jax-0-10-2-tokamax-0-0-11"
    assert walk.folder("0.0.11") == "jax-0.10.2-tokamax-0.0.11"
    assert walk.describe("0.0.11") == "tokamax 0.0.11 (jax 0.10.2)"
    jax = Walk()  # the jax walk is what it was
    assert (jax.session("0.8.3"), jax.folder("0.8.3"), env_name("0.8.3")) == (
        "conformance(jax='0.8.3')",
        "jax-0.8.3",
        "conformance-jax-0-8-3",
    )
    with pytest.raises(ValueError, match="holds one jax fixed"):
        Walk("tokamax")


def test_the_run_of_a_tokamax_step_uses_the_pairs_environment_and_folder(tmp_path):
    runner = SuiteRunner(
        tmp_path / "envs",
        "tokamax[impl=xla]",
        CASE,
        "forward",
        tmp_path / "out",
        walk=Walk("tokamax", "0.10.2"),
    )
    command = runner.command("0.0.11")
    assert command[0] == str(tmp_path / "envs/conformance-jax-0-10-2-tokamax-0-0-11/bin/python")
    joined = " ".join(command)
    assert f"--report-dir {tmp_path / 'out/jax-0.10.2-tokamax-0.0.11'}" in joined
    assert "--impl tokamax[impl=xla]" in joined
    assert runner.describe("0.0.11").endswith("at tokamax 0.0.11 (jax 0.10.2)")


FAKE_NOX = """\
import sys, pathlib
args = sys.argv[1:]
envdir = pathlib.Path(args[args.index("--envdir") + 1])
_, jax, _, tokamax, _ = args[-1].split("'")
with open(envdir.parent / "calls.txt", "a") as calls:
    calls.write(args[-1] + "\\n")
name = "conformance-jax-" + jax.replace(".", "-") + "-tokamax-" + tokamax.replace(".", "-")
python = envdir / name / "bin" / "python"
python.parent.mkdir(parents=True, exist_ok=True)
shown = "0.0.10" if tokamax == "0.0.11" else tokamax  # an environment that holds the wrong release
python.write_text(f"#!/bin/sh\\necho {jax} {shown}\\n")
python.chmod(0o755)
"""


def test_the_installer_builds_the_pair_skips_what_the_table_forbids_and_checks_both_versions(tmp_path):
    script = tmp_path / "fake_nox.py"
    script.write_text(FAKE_NOX)
    installer = NoxInstaller(
        nox=(sys.executable, str(script)),
        envdir=tmp_path / "envs",
        logs=tmp_path / "logs",
        walk=Walk("tokamax", "0.9.1"),
    )
    done = installer("0.0.10")
    assert done.ok and done.fresh, done.reason
    assert (tmp_path / "logs" / "jax-0.9.1-tokamax-0.0.10-install.log").exists()
    assert installer("0.0.11").reason == (
        "the environment holds jax 0.9.1 with tokamax 0.0.10, not 0.9.1 with tokamax 0.0.11; "
        "delete it to have it rebuilt"
    )
    skipped = installer("0.0.12")  # needs jax >= 0.9.2: skipped, nothing installed
    assert not skipped.ok and skipped.reason.startswith("tokamax 0.0.12 needs jax >= 0.9.2, not 0.9.1")
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls == [
        "conformance(jax='0.9.1', tokamax='0.0.10')",
        "conformance(jax='0.9.1', tokamax='0.0.11')",
    ]


class TokamaxWorld:
    """Fake tokamax releases at one jax: the first bad one is ``boundary``; ``broken`` cannot install."""

    def __init__(self, boundary: str, broken: tuple[str, ...] = ()):
        self.boundary, self.broken = boundary, broken
        self.tested: list[str] = []

    def install(self, version: str) -> Install:
        return Install(version not in self.broken, True, f"tokamax {version}: no wheel", 1.0)

    def run(self, version: str) -> Observation:
        self.tested.append(version)
        older = TOKAMAX.index(version) < TOKAMAX.index(self.boundary)
        return Observation("pass" if older else "fail", 1.0 if older else 9.0)


@pytest.mark.parametrize("boundary", TOKAMAX[1:])
def test_the_walk_finds_the_first_bad_tokamax_release(boundary):
    world = TokamaxWorld(boundary)
    result = bisect(TOKAMAX, "0.0.9", "0.0.12", world.install, world.run, "tokamax")
    assert result.first == (boundary,) and result.last == TOKAMAX[TOKAMAX.index(boundary) - 1]
    assert result.headline() == f"first bad release: {boundary} (last good: {result.last})"


def test_an_unknown_tokamax_release_is_refused_naming_the_library():
    world = TokamaxWorld("0.0.11")
    with pytest.raises(
        BisectError, match=r"--bad 0.0.13 is not a known tokamax release .*pip index versions tokamax"
    ):
        bisect(TOKAMAX, "0.0.9", "0.0.13", world.install, world.run, "tokamax")


@pytest.fixture
def fake_env(monkeypatch) -> dict:
    """The command line's installer and runner: tokamax 0.0.11 breaks the case at jax 0.10.2. Returns
    the walk each was built with."""
    built: dict = {}
    verdicts = {"0.0.10": "pass", "0.0.11": "fail", "0.0.12": "fail"}

    def installer(**kwargs):
        built["installer"] = kwargs["walk"]
        return lambda version: Install(True, True, "", 3.0)

    def runner(**kwargs):
        built["runner"] = kwargs["walk"]
        return lambda version: Observation(verdicts[version], 1.0, "", 1.0, f"jax-0.10.2-tokamax-{version}")

    monkeypatch.setattr(installs, "NoxInstaller", installer)
    monkeypatch.setattr(installs, "SuiteRunner", runner)
    return built


ARGS = [
    "bisect",
    "--impl",
    "tokamax[impl=xla]",
    "--case",
    CASE,
    "--versions",
    "0.0.10,0.0.11,0.0.12",
    "--nox",
    "nox",
]
LEDGER = """\
[[issue]]
id = "tk"
subject = "tokamax[impl=xla]"
checks = ["forward"]
jax = ">=0.10.2"
tokamax = "==0.0.12"
link = "found here"
summary = "wrong"
"""


def test_the_command_line_walks_tokamax_at_a_fixed_jax_and_edits_the_tokamax_range(
    fake_env, tmp_path, capsys
):
    ledger = tmp_path / "ledger.toml"
    ledger.write_text(LEDGER)
    argv = [*ARGS, "--library", "tokamax", "--jax", "0.10.2", "--good", "0.0.10", "--bad", "0.0.12"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--known-issue", "tk", "--ledger", str(ledger)]) == 0
    out = capsys.readouterr().out
    assert "tokamax releases at jax 0.10.2: good 0.0.10, bad 0.0.12; 3 releases" in out
    assert "tokamax 0.0.11 (jax 0.10.2): fail, ratio 1 -> bad" in out
    assert "tokamax (jax 0.10.2 fixed): first bad release: 0.0.11 (last good: 0.0.10)" in out
    assert fake_env["installer"] == fake_env["runner"] == Walk("tokamax", "0.10.2")
    # the tokamax range, not jax's: first bad 0.0.11; ==0.0.12 becomes the bound it implies
    assert entry_range(ledger.read_text(), "tk", "tokamax") == ">=0.0.11,<=0.0.12"
    assert entry_range(ledger.read_text(), "tk") == ">=0.10.2"
    body = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert (body["library"], body["jax"], body["first"]) == ("tokamax", "0.10.2", ["0.0.11"])
    assert body["known_issue"] == {
        "id": "tk",
        "ledger": str(ledger),
        "tokamax_before": "==0.0.12",
        "tokamax_after": ">=0.0.11,<=0.0.12",
    }


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ["--library", "tokamax"],
            "error: --library tokamax walks tokamax releases at one fixed jax: give it",
        ),
        (
            ["--jax", "0.10.2"],
            "error: --jax 0.10.2 holds jax fixed for a walk over tokamax releases: add --library",
        ),
        (
            ["--library", "tokamax", "--jax", "0.9.1"],
            "error: tokamax 0.0.12 needs jax >= 0.9.2, not 0.9.1; use "
            "\"conformance(jax='0.9.2', tokamax='0.0.12')\"",
        ),
        (["--library", "tokamax", "--jax", "latest"], "error: jax 'latest' is not a release number"),
    ],
)
def test_a_tokamax_walk_that_cannot_start_is_one_line_and_exit_2(fake_env, tmp_path, capsys, extra, expected):
    argv = [*ARGS, *extra, "--good", "0.0.10", "--bad", "0.0.12", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1
    assert not (tmp_path / "bisect.json").exists()
