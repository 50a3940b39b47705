"""Bad input: one line naming the problem and the fix, never a traceback (one test per item)."""

from __future__ import annotations

import json
import shutil

import pytest

from reports import jax_versions
from tests.reliability.suite import FAULTY, run_module
from tests.support.suite import run_suite

USAGE_ERROR = 4  # pytest's exit status for a usage error


def one_line_error(done) -> str:
    """The run's complaint: exactly one non-empty line, no traceback anywhere."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "INTERNALERROR" not in output, output[-3000:]
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


def suite_error(tmp_path, impl: str, *args: str) -> str:
    done = run_suite(tmp_path, impl, *args)
    assert done.returncode == USAGE_ERROR, done.stdout[-2000:] + done.stderr[-2000:]
    return one_line_error(done)


def test_unknown_subject(tmp_path):
    line = suite_error(tmp_path, "flash_attn_v9")
    assert "unknown subject 'flash_attn_v9'" in line and "'xla'" in line and "package.module:function" in line


@pytest.mark.parametrize(
    "impl, expected",
    [
        ("no_such_pkg.attn:attention", "cannot import module 'no_such_pkg.attn'"),
        (f"{FAULTY}:no_such_function", "has no attribute 'no_such_function'"),
        ("tests.faulty.broken_import:attention", "raised RuntimeError: libcudart.so.12"),
    ],
)
def test_unimportable_impl_path(tmp_path, impl, expected):
    line = suite_error(tmp_path, impl)
    assert expected in line


@pytest.mark.parametrize(
    "impl, expected",
    [
        ("tests.faulty.signatures:two_positional", "fn(q, k, v, *, scale, ...)"),
        ("tests.faulty.signatures:unpassable", "['flavour'] are never passed; give them defaults"),
    ],
)
def test_wrong_signature(tmp_path, impl, expected):
    assert expected in suite_error(tmp_path, impl)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("B=1,Hq=4,Hkv=3,Sq=128,Sk=256,D=64", "q heads 4 is not a multiple of kv heads 3"),
        ("B=2,Sq=16,Sk=16,kv_lengths=8/20", "kv_lengths must lie in [0, 16]"),
        ("B=1,Hq=2,mask=bh1x", "mask pattern 'bh1x' must be 4 of 'bhqk' or '1'"),
        ("B=1,Sq=7,causal=sideways", "use top_left, bottom_right or no"),
        ("B=1,Sq=0", "every dimension must be >= 1"),
    ],
)
def test_impossible_user_case(tmp_path, case, expected):
    line = suite_error(tmp_path, f"{FAULTY}:healthy", "--case", case)
    assert line.startswith(f"ERROR: --case '{case}'") and expected in line


def test_unknown_or_uninstallable_jax_version():
    """The nox session's messages (noxfile.install_project ends the session with these)."""
    for problem in (jax_versions.version_problem("latest"), jax_versions.version_problem("0.1.0")):
        assert problem and "\n" not in problem and ("name one like" in problem or "use " in problem)
    uv = (
        "× No solution found when resolving dependencies:\n"
        "  ╰─▶ Because there is no version of jax==9.9.9 and you require jax==9.9.9, we can conclude "
        "that your requirements are unsatisfiable.\n"
    )
    failure = jax_versions.install_failure("9.9.9", uv)
    assert "\n" not in failure and "no such release" in failure and "Fix:" in failure


@pytest.fixture
def good(tmp_path):
    folder = tmp_path / "good"
    header = {
        "kind": "run",
        "schema": 1,
        "impl": "x",
        "subjects": ["x"],
        "profile": "ci",
        "hypothesis_seed": 0,
    }
    folder.mkdir()
    (folder / "results.jsonl").write_text(
        json.dumps(header) + "\n" + json.dumps({"kind": "end", "schema": 1}) + "\n"
    )
    return folder


@pytest.mark.parametrize(
    "damage, expected",
    [
        ("missing", "no results file"),
        ("empty", "the results file is empty"),
        ("truncated", "no run header"),  # cut inside its first line
        ("corrupt", "corrupt line"),
        ("wrong_schema", "schema version 99"),
    ],
)
def test_gate_given_a_bad_results_folder(tmp_path, good, damage, expected):
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    results = bad / "results.jsonl"
    text = results.read_text()
    if damage == "missing":
        results.unlink()
    elif damage == "empty":
        results.write_text("")
    elif damage == "truncated":
        results.write_text(text[:30])
    elif damage == "corrupt":
        results.write_text(text.replace('{"kind": "end"', '{"kind": "end" ]]', 1) + text)
    else:
        results.write_text(text.replace('"schema": 1', '"schema": 99'))
    done = run_module("reports", "gate", str(good), str(bad))
    assert done.returncode == 2
    line = one_line_error(done)
    assert line.startswith("error: ") and expected in line and str(bad) in line


def test_conflicting_options(tmp_path):
    """--resume into a folder recorded with another profile would mix two runs' cases."""
    header = {"kind": "run", "schema": 1, "impl": f"{FAULTY}:healthy", "profile": "dev", "hypothesis_seed": 7}
    (tmp_path / "results.jsonl").write_text(json.dumps(header) + "\n")
    line = suite_error(tmp_path, f"{FAULTY}:healthy", "--resume", "--profile", "ci")
    assert "was recorded with --profile dev, not ci" in line and "rerun with --profile dev" in line


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--profile", "weekly"], "invalid choice: 'weekly'"),
        (["--worker-memory-limit", "lots"], "--worker-memory-limit 'lots' is not a size"),
    ],
)
def test_bad_option_values(tmp_path, args, expected):
    done = run_suite(tmp_path, f"{FAULTY}:healthy", *args)
    assert done.returncode == USAGE_ERROR
    output = done.stdout + done.stderr
    assert "Traceback" not in output and expected in output, output
