"""Writing a bisection's answer into a ledger entry's jax range, in place."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

import pytest

from reports.ledger.range_edit import LedgerEditError, entry_range, new_range, set_range

BUILTIN = Path(__file__).resolve().parents[3] / "kernels" / "known_issues.toml"

LEDGER = """\
# team ledger
[[issue]]
id = "first"
subject = "xla"
checks = ["forward"]
jax = '>=0.6.2'   # seen since the matrix began
link = "x"
summary = "y"

[[issue]]
id = "second"
subject = "xla"
checks = ["forward", "lse"]
link = "x"
summary = "no range yet"

# trailing comment about the next one
[[issue]]
id = "third"
subject = "xla"
checks = ["forward"]
link = "x"
summary = "z"
"""


@pytest.mark.parametrize(
    ("existing", "direction", "first", "failing", "expected"),
    [
        ("<0.8.3", "fix", ["0.8.2"], ["0.7.2", "0.8.1"], "<0.8.2"),  # the real finding's shape
        (">=0.6.2,<0.8.3", "fix", ["0.8.2"], ["0.8.1"], ">=0.6.2,<0.8.2"),  # the lower bound stays
        ("==0.7.2", "fix", ["0.8.0"], ["0.7.2"], ">=0.7.2,<0.8.0"),  # seen at one release: from it on
        (">0.7.2", "regression", ["0.8.0"], ["0.8.0", "0.8.3"], ">=0.8.0"),
        (">=0.4.35,<0.9.0", "regression", ["0.6.2"], ["0.6.2"], ">=0.6.2,<0.9.0"),
        (None, "regression", ["0.7.0", "0.7.2"], ["0.7.2"], ">=0.7.0"),  # skipped: from the oldest candidate
        (None, "fix", ["0.7.0", "0.7.2"], ["0.6.2"], "<0.7.2"),  # ... up to the newest one
        (">=0.8.0", "fix", ["0.8.2"], ["0.7.2", "0.8.1"], "<0.8.2"),  # a bound that excludes a failure goes
    ],
)
def test_new_range(existing, direction, first, failing, expected):
    assert new_range(existing, direction, first, failing) == expected


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_an_existing_range_is_replaced_keeping_quotes_and_comment():
    edited = set_range(LEDGER, "first", "<0.8.2")
    assert changed_lines(LEDGER, edited) == [
        "-jax = '>=0.6.2'   # seen since the matrix began",
        "+jax = '<0.8.2'   # seen since the matrix began",
    ]


def test_a_missing_range_is_added_inside_its_entry():
    edited = set_range(LEDGER, "second", ">=0.8.0")
    assert changed_lines(LEDGER, edited) == ['+jax = ">=0.8.0"']
    assert edited.index('jax = ">=0.8.0"') < edited.index("# trailing comment")
    assert entry_range(edited, "second") == ">=0.8.0" and entry_range(edited, "third") is None


def test_the_last_entry_without_a_final_newline():
    text = LEDGER.rstrip("\n")
    assert entry_range(set_range(text, "third", "<1"), "third") == "<1"


def test_the_builtin_ledger_changes_in_one_line():
    text = BUILTIN.read_text(encoding="utf-8")
    issue = tomllib.loads(text)["issue"][0]
    edited = set_range(text, issue["id"], ">=0.5.3")
    assert len(changed_lines(text, edited)) == 2
    assert entry_range(edited, issue["id"]) == ">=0.5.3"


def test_an_unknown_id_is_one_line():
    with pytest.raises(LedgerEditError) as exc:
        set_range(LEDGER, "nope", "<1")
    assert "no ledger entry with id 'nope'" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(LedgerEditError):
        entry_range(LEDGER, "nope")


def test_an_edit_that_would_change_more_names_the_line_to_set_instead():
    duplicated = LEDGER + LEDGER.split("\n\n")[0].replace("# team ledger\n", "\n")  # "first" twice
    with pytest.raises(LedgerEditError) as exc:
        set_range(duplicated, "first", "<0.8.2")
    assert (
        str(exc.value) == "the entry 'first' could not be edited in place; set its line to: jax = \"<0.8.2\""
    )
