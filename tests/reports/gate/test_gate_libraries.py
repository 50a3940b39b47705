"""The gate compares any two (jax, tokamax) folders and says which library the upgrade changed:
jax, tokamax, or both (and a folder without tokamax is 'not installed', not an error)."""

from __future__ import annotations

import pytest

from reports.__main__ import main
from reports.gate.findings import EXIT_PASS, EXIT_REGRESSION
from reports.gate.library_change import LibraryChange
from tests.support.report_folders import standard_results, with_verdict, write_run


def _gate(tmp_path, capsys, base: tuple[str, str | None], cand: tuple[str, str | None], cand_results=None):
    folders = []
    for role, (jax, tokamax), results in (
        ("base", base, standard_results()),
        ("cand", cand, cand_results or standard_results()),
    ):
        name = f"{role}-jax-{jax}" + (f"-tokamax-{tokamax}" if tokamax else "")
        folders.append(write_run(tmp_path / name, results, jax=jax, tokamax=tokamax))
    code = main(["gate", *map(str, folders)])
    out = capsys.readouterr().out
    return code, out.splitlines()[0], out


@pytest.mark.parametrize(
    ("base", "cand", "words", "upgrade"),
    [
        (
            ("0.9.2", "0.0.12"),
            ("0.10.2", "0.0.12"),
            "jax changed",
            "jax 0.9.2 → 0.10.2 · tokamax 0.0.12 (unchanged) (jax changed)",
        ),
        (
            ("0.10.2", "0.0.11"),
            ("0.10.2", "0.0.12"),
            "tokamax changed",
            "jax 0.10.2 (unchanged) · tokamax 0.0.11 → 0.0.12 (tokamax changed)",
        ),
        (
            ("0.9.2", "0.0.11"),
            ("0.10.2", "0.0.12"),
            "jax and tokamax changed",
            "jax 0.9.2 → 0.10.2 · tokamax 0.0.11 → 0.0.12 (jax and tokamax changed)",
        ),
    ],
    ids=["jax", "tokamax", "both"],
)
def test_the_verdict_says_which_library_changed(tmp_path, capsys, base, cand, words, upgrade):
    code, verdict, out = _gate(tmp_path, capsys, base, cand)
    assert code == EXIT_PASS
    assert verdict.startswith(f"## ✅ Upgrade gate: PASS — jax {cand[0]} + tokamax {cand[1]} (")
    assert f"against jax {base[0]} + tokamax {base[1]} (" in verdict
    assert verdict.endswith(f"0 fixed; {words})")
    assert f"**Upgrade:** {upgrade}" in out


def test_a_failing_verdict_names_the_library_too(tmp_path, capsys):
    results = standard_results()
    victim = next(r for r in results if r.case.subject == "xla" and r.check == "backward")
    broken = standard_results(extra=[with_verdict(victim, "fail", 8.0, reason="dq out of tolerance")])
    code, verdict, _ = _gate(tmp_path, capsys, ("0.10.2", "0.0.11"), ("0.10.2", "0.0.12"), broken)
    assert code == EXIT_REGRESSION
    assert verdict.startswith("## ❌ Upgrade gate: FAIL — 1 regression in jax 0.10.2 + tokamax 0.0.12")
    assert verdict.endswith("compared; tokamax changed)")


def test_a_folder_without_tokamax_reads_as_not_installed(tmp_path, capsys):
    code, verdict, out = _gate(tmp_path, capsys, ("0.10.2", None), ("0.10.2", "0.0.12"))
    assert code == EXIT_PASS and verdict.endswith("tokamax changed)")
    assert "**Upgrade:** jax 0.10.2 (unchanged) · tokamax not installed → 0.0.12 (tokamax changed)" in out


def test_the_same_pair_changes_no_library():
    change = LibraryChange((("jax", ("0.10.2", "0.10.2")), ("tokamax", (None, None))))
    assert change.changed == () and change.words() == "no library changed"
    assert change.line() == "jax 0.10.2 (unchanged) · tokamax not installed (unchanged) (no library changed)"
