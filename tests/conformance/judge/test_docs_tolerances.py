"""docs/tolerances.md's "Tolerance policy" states the numbers ``conformance.judge.tolerance`` uses:
each row's k and k_mean, the floors' ulps, and a row for every tensor. A change on either side
without the other fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conformance.judge import tolerance

DOC = Path(__file__).resolve().parents[3] / "docs" / "tolerances.md"
SECTION = "## Tolerance policy"
HEADER = ("tensor", "k", "k_mean", "why")


def _section() -> str:
    text = DOC.read_text()
    assert SECTION in text, f"docs/tolerances.md lost its section {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def documented_table() -> dict[str, tuple[float, float]]:
    """tensor -> (k, k_mean) from the section's table; a row naming several tensors ("dk, dv")
    gives each of them."""
    lines = [line for line in _section().splitlines() if line.startswith("|")]
    assert lines and tuple(_cells(lines[0])) == HEADER, f"the table's header is not {HEADER}"
    assert set("".join(_cells(lines[1]))) <= set("-:"), "the header's separator row is missing"
    rows: dict[str, tuple[float, float]] = {}
    for line in lines[2:]:
        names, k, k_mean, *_ = _cells(line)
        for name in (n.strip() for n in names.split(",")):
            assert name not in rows, f"docs/tolerances.md lists {name!r} twice"
            rows[name] = (float(k), float(k_mean))
    return rows


def readme_floor_ulps(floor: str) -> float:
    """The ulps the section's prose gives ``floor`` ("**floor_max** is 2 eps ...")."""
    found = re.findall(rf"\*\*{floor}\*\*(?: is)? ([0-9.]+) eps", _section())
    assert len(found) == 1, f"docs/tolerances.md states {floor}'s eps {len(found)} times, expected once"
    return float(found[0])


def test_every_tensor_has_a_row_and_every_row_a_tensor():
    assert sorted(documented_table()) == sorted(tolerance.TOLERANCES)


@pytest.mark.parametrize("tensor", sorted(tolerance.TOLERANCES))
def test_each_rows_k_and_k_mean_are_the_policys(tensor):
    rule = tolerance.TOLERANCES[tensor]
    assert documented_table().get(tensor) == (rule.k, rule.k_mean), (
        f"docs/tolerances.md row for {tensor} differs from TOLERANCES[{tensor!r}] "
        f"(k={rule.k:g}, k_mean={rule.k_mean:g})"
    )


def test_the_floors_ulps_are_the_policys():
    assert readme_floor_ulps("floor_max") == tolerance.FLOOR_ULPS
    assert readme_floor_ulps("floor_mean") == tolerance.MEAN_FLOOR_ULPS
    assert readme_floor_ulps("recomputed_p") == tolerance.RECOMPUTED_P_ULPS
    assert re.findall(r"\(([0-9.]+) eps in fp8\)", _section()) == [f"{tolerance.FP8_FLOOR_ULPS:g}"]
