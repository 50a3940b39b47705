"""The version table: one row per library, and every consumer iterates it."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from reports import jax_versions as jv
from versions import table

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("library", table.LIBRARIES, ids=lambda lib: lib.name)
def test_each_row_is_consistent(library):
    versions = [r.version for r in library.releases]
    assert versions == sorted(versions, key=table.release_number), "releases oldest first"
    assert set(library.matrix) <= set(versions), "the matrix runs known releases"
    assert list(library.matrix) == sorted(library.matrix, key=table.release_number)
    assert all(table.is_release(v) for v in versions)
    firsts = [first for first, _ in library.pythons]
    assert firsts == sorted(firsts, key=table.release_number)
    for release in library.releases:
        for other, oldest in release.needs:
            assert table.library(other) and table.is_release(oldest), (release, other)


def test_one_primary_library_and_the_companions_pin_their_newest_in_pyproject():
    assert [lib.name for lib in table.LIBRARIES if lib.primary] == ["jax"]
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]
    for companion in table.COMPANIONS:
        assert groups[companion.group] == [f"{companion.distribution}=={companion.newest}"]


@pytest.mark.parametrize(
    ("jax", "tokamax", "python"),
    [
        ("0.4.35", None, "3.11"),
        ("0.10.2", None, "3.11"),
        ("0.10.2", "0.0.12", "3.11"),
        ("0.10.2", "0.0.15", "3.12"),  # tokamax 0.0.15 takes jax 0.10.2 but needs Python 3.12
        ("0.11.0", None, "3.12"),
        ("0.12.0.1", "0.0.17", "3.12"),
    ],
)
def test_a_run_needs_the_newest_python_of_its_releases(jax, tokamax, python):
    assert jv.python_for(jax, tokamax) == python


def test_the_python_of_a_release_nobody_listed_follows_its_row():
    assert table.JAX.python_for("0.13.0") == "3.12"  # from 0.11.0 on
    assert table.JAX.python_for("0.4.1") == "3.11"
    assert table.release_number("0.7.0rc1") == (0, 7, 0)
    with pytest.raises(ValueError, match="not a release number"):
        table.release_number("latest")


def test_the_default_companion_never_moves_a_run_to_another_python():
    for jax in jv.MATRIX:
        tokamax = jv.tokamax_for(jax)
        assert jv.python_for(jax, tokamax) == jv.python_for(jax), (jax, tokamax)


def test_run_keys_name_folders_and_sessions_in_table_order():
    assert jv.run_key("0.12.0.1", "0.0.17") == (("jax", "0.12.0.1"), ("tokamax", "0.0.17"))
    assert jv.folder_name(jv.run_key("0.12.0.1", "0.0.17")) == "jax-0.12.0.1-tokamax-0.0.17"
    assert jv.session_id("0.12.0.1", None) == "jax='0.12.0.1'"
    assert jv.session_id("0.12.0.1", "0.0.17") == "jax='0.12.0.1', tokamax='0.0.17'"


def test_an_unknown_library_is_one_line_naming_the_known_ones():
    with pytest.raises(ValueError, match="known: jax, tokamax"):
        table.library("torch")


def test_a_release_row_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.JAX.matrix = ()  # type: ignore[misc]
